"""The one C-family renderer: a scheduled LoopProgram -> plain C, OpenCL C or CUDA C source.

Pipeline position: backends whose ``Capabilities.dialect`` is a C dialect call
``render(program, dialect)`` and compile the result (cc, nvcc, the OpenCL driver). All that
differs between dialects is data in ``cortex.core.render.dialects``.

The generated source, per program:

* one function per kernel, named ``<program>_<kernel>`` (:func:`kernel_symbol`), whose
  arguments are every buffer in program order (read-only ones ``const``), then every size
  symbol, then the kernel's parameters — all ints are 32-bit;
* with dialects that have ``host_entry`` (plain C), a ``<program>_run`` function with the same
  buffer and size arguments that performs the host steps (launches and host loops), so the
  whole recursion is one native call;
* global buffers are flat pointers indexed row-major; private and shared arrays are C arrays;
  shared arrays are declared at the top of the kernel (OpenCL requires it);
* ``Reduce`` becomes an accumulator loop emitted before the statement that uses it; a
  ``Select`` whose branch needs such a loop becomes an if/else, so a guarded indirect load is
  never evaluated on the wrong side of its guard;
* loop kinds map to the dialect: OpenMP pragmas (guarded by ``_OPENMP``) for parallel and
  vectorized loops in C, grid-/block-stride loops over group and thread ids on GPUs (correct for
  any launch size), unroll pragmas; a grid barrier is CUDA cooperative groups' grid sync.
"""

from __future__ import annotations

from cortex.core import loopir as ir
from cortex.core.render.dialects import Dialect, get_dialect


class RenderError(ir.LoopIRError):
    """The program uses something the dialect cannot express (e.g. a grid barrier in OpenCL)."""


def kernel_symbol(program: ir.Program, kernel: str) -> str:
    return f"{program.name}_{kernel}"


def entry_symbol(program: ir.Program) -> str:
    return f"{program.name}_run"


class CRenderer:
    """One program's C-family source in one dialect: ``CRenderer(program, dialect).render()``.

    The dialect tables (``cortex.core.render.dialects``) cover what differs between C, OpenCL C and
    CUDA C. A backend that needs a statement form no table can express (e.g. OpenCL vector
    statements) subclasses this class in its plugin and overrides the method that emits that
    construct (``loop``, ``kernel``, ...), falling back to ``super()`` for everything else."""

    def __init__(self, program: ir.Program, d: Dialect) -> None:
        self.p = program
        self.d = d
        self.dtypes = {b.name: b.dtype for b in program.buffers}
        self.allocs: dict[str, ir.Alloc] = {}
        self.helpers: dict[str, str] = {}
        self.counter = 0
        self.pre: list[str] = []
        self.uses_grid_barrier = False
        self.in_parallel = False  # CPU threads are spawned by the outermost parallel loop only

    # ------------------------------------------------------------------ types, names
    def ctype(self, dtype: str) -> str:
        if dtype == ir.INT:
            return self.d.int_type
        if dtype == ir.BOOL:
            return self.d.bool_type
        return self.d.float_types[dtype]

    def fresh(self, base: str) -> str:
        self.counter += 1
        return f"cx_{base}{self.counter}"

    def dtype(self, e: ir.Expr) -> str:
        return ir.infer_dtype(e, self.dtypes)

    def mathfn(self, name: str, dtype: str) -> str:
        return self.d.math[name][dtype]

    def helper(self, name: str, dtype: str) -> str:
        t = self.ctype(dtype)
        sym = f"cx_{name}_{dtype}"
        if sym in self.helpers:
            return sym
        hq = self.d.helper_qualifier
        if name == "sigmoid":
            one = "1.0" + self.d.float_suffix[dtype]
            body = f"return {one} / ({one} + {self.mathfn('exp', dtype)}(-x));"
            self.helpers[sym] = f"{hq} {t} {sym}({t} x) {{ {body} }}"
        elif name in ("min", "max"):
            # NaN propagates (as NumPy's minimum/maximum): C's fmin/fmax return the other operand
            op = "<" if name == "min" else ">"
            test = f"a {op} b" if dtype not in ir.FLOAT_DTYPES else f"a {op} b || a != a"
            self.helpers[sym] = f"{hq} {t} {sym}({t} a, {t} b) {{ return ({test}) ? a : b; }}"
        else:
            raise RenderError(f"no helper {name}")
        return sym

    # ------------------------------------------------------------------ expressions
    def const(self, c: ir.Const) -> str:
        if c.dtype in ir.FLOAT_DTYPES:
            v = float(c.value)
            if v != v:
                raise RenderError("NaN constants cannot be rendered")
            if v in (float("inf"), float("-inf")):
                return ("-" if v < 0 else "") + f"(({self.ctype(c.dtype)})INFINITY)"
            text = repr(v)
            if "e" not in text and "." not in text:
                text += ".0"
            text += self.d.float_suffix[c.dtype]
            return f"({text})" if v < 0 else text
        if c.dtype == ir.BOOL:
            return "1" if c.value else "0"
        v = int(c.value)
        return f"({v})" if v < 0 else str(v)

    def sub(self, e: ir.Expr) -> tuple[str, list[str]]:
        """Render ``e`` with its own prelude lines (for conditional evaluation)."""
        saved, self.pre = self.pre, []
        text = self.expr(e)
        lines, self.pre = self.pre, saved
        return text, lines

    def flat_index(self, name: str, index: tuple[ir.Expr, ...]) -> str:
        if name in self.allocs:
            return name + "".join(f"[{self.expr(i)}]" for i in index)
        b = self.p.buffer(name)
        if len(index) != len(b.shape):
            raise RenderError(f"access {name} with {len(index)} indices; it has {len(b.shape)} dims")
        off = self.expr(index[0])
        for i, dim in zip(index[1:], b.shape[1:]):
            off = f"({off}) * ({self.expr(dim)}) + ({self.expr(i)})"
        return f"{name}[{off}]"

    def expr(self, e: ir.Expr) -> str:
        if isinstance(e, ir.Const):
            return self.const(e)
        if isinstance(e, ir.Var):
            return e.name
        if isinstance(e, ir.Load):
            return self.flat_index(e.buffer, e.index)
        if isinstance(e, ir.BinOp):
            t = self.dtype(e.a)
            if e.op in ("and", "or"):
                a = self.expr(e.a)
                b, lines = self.sub(e.b)
                if not lines:
                    return f"({a} {'&&' if e.op == 'and' else '||'} {b})"
                tmp = self.fresh("cond")
                self.pre.append(f"int {tmp} = {a};")
                test = tmp if e.op == "and" else f"!{tmp}"
                self.pre += [f"if ({test}) {{"] + ["  " + x for x in lines] + [f"  {tmp} = {b};", "}"]
                return tmp
            a, b = self.expr(e.a), self.expr(e.b)
            if e.op in ("min", "max"):
                return f"{self.helper(e.op, t)}({a}, {b})"
            op = {"//": "/"}.get(e.op, e.op)
            return f"({a} {op} {b})"
        if isinstance(e, ir.Cmp):
            return f"({self.expr(e.a)} {e.op} {self.expr(e.b)})"
        if isinstance(e, ir.Not):
            return f"(!{self.expr(e.a)})"
        if isinstance(e, ir.Cast):
            return f"(({self.ctype(e.dtype)})({self.expr(e.a)}))"
        if isinstance(e, ir.Call):
            t = self.dtype(e.args[0])
            args = ", ".join(self.expr(a) for a in e.args)
            if e.fn == "sigmoid":
                return f"{self.helper('sigmoid', t)}({args})"
            if e.fn == "abs" and t == ir.INT:
                a = self.expr(e.args[0])
                return f"(({a}) < 0 ? -({a}) : ({a}))"
            return f"{self.mathfn(e.fn, t)}({args})"
        if isinstance(e, ir.Select):
            c = self.expr(e.cond)
            a, la = self.sub(e.a)
            b, lb = self.sub(e.b)
            if not la and not lb:
                return f"({c} ? {a} : {b})"
            tmp = self.fresh("sel")
            t = self.ctype(self.dtype(e.a))
            self.pre.append(f"{t} {tmp};")
            self.pre += [f"if ({c}) {{"] + ["  " + x for x in la] + [f"  {tmp} = {a};", "} else {"]
            self.pre += ["  " + x for x in lb] + [f"  {tmp} = {b};", "}"]
            return tmp
        if isinstance(e, ir.Reduce):
            return self.reduce(e)
        raise RenderError(f"cannot render {e!r}")

    def reduce(self, e: ir.Reduce) -> str:
        dt = self.dtype(e.body)
        t = self.ctype(dt)
        acc = self.fresh("acc")
        lo, hi = self.fresh("lo"), self.fresh("hi")
        it = self.d.int_type
        self.pre.append(f"const {it} {lo} = {self.expr(e.start)};")
        self.pre.append(f"const {it} {hi} = {self.expr(e.stop)};")
        if e.op == "max":
            init = f"(-(({t})INFINITY))" if dt in ir.FLOAT_DTYPES else "(-2147483647 - 1)"
        else:
            init = "0" if dt == ir.INT else "0.0" + self.d.float_suffix[dt]
        self.pre.append(f"{t} {acc} = {init};")
        body, lines = self.sub(e.body)
        if e.op == "max":
            fn = self.helper("max", dt)
            combine = lambda x: f"{acc} = {fn}({acc}, {x});"  # noqa: E731
        else:
            combine = lambda x: f"{acc} += {x};"  # noqa: E731
        if e.lanes == 1:
            self.pre.append(f"for ({it} {e.var} = {lo}; {e.var} < {hi}; ++{e.var}) {{")
            self.pre += ["  " + x for x in lines] + [f"  {combine(body)}", "}"]
        else:
            # lane i of the group takes lo + i, lo + i + lanes, ...; then a butterfly of xor
            # shuffles leaves the combined value in every lane of the group
            self.need_shuffles(f"reduce over {e.var} over {e.lanes} lanes")
            lane = f"({self.d.thread_id} % {e.lanes})"
            self.pre.append(f"for ({it} {e.var} = {lo} + {lane}; {e.var} < {hi}; {e.var} += {e.lanes}) {{")
            self.pre += ["  " + x for x in lines] + [f"  {combine(body)}", "}"]
            if e.lanes == self.d.warp_size:
                mask = self.d.full_lane_mask
            else:
                mask = self.d.lane_mask.format(bits=(1 << e.lanes) - 1, align=self.d.warp_size - e.lanes)
            m = self.fresh("mask")
            self.pre.append(f"const unsigned {m} = {mask};")
            offset = e.lanes // 2
            while offset >= 1:
                self.pre.append(combine(self.d.shuffle_xor.format(mask=m, value=acc, offset=offset, lanes=e.lanes)))  # type: ignore[union-attr]
                offset //= 2
        if e.op == "mean":
            self.pre.append(f"if ({hi} > {lo}) {acc} /= ({t})({hi} - {lo});")
        return acc

    def need_shuffles(self, what: str) -> None:
        if self.d.shuffle_xor is None or self.d.thread_id is None or self.d.warp_size < 2:
            raise RenderError(
                f"{what}: the {self.d.name} dialect has no warp shuffles for cross-lane reductions; "
                "schedule reduce_lanes=1"
            )

    # ------------------------------------------------------------------ statements
    def _used(self, s: ir.Let) -> bool:
        """Does ``s``'s body use its variable? (One walk of the kernel answers it for a name
        bound once there, which the lowering's and the schedule's names are.)"""
        if getattr(self, "let_binds", {}).get(s.var) == 1:
            return self.used_names.get(s.var, 0) > 0
        return any(isinstance(n, ir.Var) and n.name == s.var for n in ir.walk(s.body))

    def flush(self, pad: str) -> list[str]:
        out = [pad + x for x in self.pre]
        self.pre = []
        return out

    def stmt(self, s: ir.Stmt, depth: int) -> list[str]:
        pad = "  " * depth
        if isinstance(s, ir.Seq):
            return [x for st in s.stmts for x in self.stmt(st, depth)]
        if isinstance(s, ir.Store):
            target = self.flat_index(s.buffer, s.index)
            value = self.expr(s.value)
            return self.flush(pad) + [f"{pad}{target} = {value};"]
        if isinstance(s, ir.Let):
            # a chain of lets is one block of declarations (names are never shadowed): a block
            # per let nested a jammed body's hundreds of lets past clang's 256 brackets
            out = [f"{pad}{{"]
            while isinstance(s, ir.Let):
                value = self.expr(s.value)
                t = self.ctype(self.dtype(s.value))
                out += self.flush(pad + "  ") + [f"{pad}  const {t} {s.var} = {value};"]
                if not self._used(s):
                    out.append(f"{pad}  (void){s.var};")
                s = s.body
            return out + self.stmt(s, depth + 1) + [f"{pad}}}"]
        if isinstance(s, ir.If):
            cond = self.expr(s.cond)
            out = self.flush(pad) + [f"{pad}if ({cond}) {{"] + self.stmt(s.then, depth + 1)
            if s.orelse is not None:
                out += [f"{pad}}} else {{"] + self.stmt(s.orelse, depth + 1)
            return out + [f"{pad}}}"]
        if isinstance(s, ir.For):
            return self.loop(s, depth)
        if isinstance(s, ir.Alloc):
            self.allocs[s.name] = s
            self.dtypes[s.name] = s.dtype
            try:
                dims = "".join(f"[{d}]" for d in s.shape)
                if s.scope == "shared" and self.d.shared_qualifier is not None:
                    self.shared_allocs.append(s)
                    return self.stmt(s.body, depth)
                return [f"{pad}{{", f"{pad}  {self.ctype(s.dtype)} {s.name}{dims};"] + self.stmt(s.body, depth + 1) + [f"{pad}}}"]
            finally:
                del self.allocs[s.name]
                del self.dtypes[s.name]
        if isinstance(s, ir.Prefetch):
            return [f"{pad}/* prefetch {s.buffer}: a cache hint this renderer does not emit */"]
        if isinstance(s, ir.Barrier):
            if s.scope == "group":
                return [pad + (self.d.group_barrier or "/* group barrier: one thread per group */")]
            if self.d.grid_barrier is None:
                raise RenderError(
                    f"the {self.d.name} dialect has no grid-wide barrier; schedule kernel_form='per_level'"
                )
            self.uses_grid_barrier = True
            return [pad + (self.d.grid_barrier or "/* grid barrier: sequential execution */")]
        raise RenderError(f"cannot render statement {s!r}")

    def loop(self, s: ir.For, depth: int) -> list[str]:
        pad = "  " * depth
        it = self.d.int_type
        start, stop = self.expr(s.start), self.expr(s.stop)
        end = f"{s.var}__end"
        out = [f"{pad}{{"] + self.flush(pad + "  ") + [f"{pad}  const {it} {end} = {stop};"]
        step = f"++{s.var}"
        init = start
        pragma = ""
        if s.kind == "parallel" and not self.in_parallel:
            pragma = self.d.parallel_pragma
        elif s.kind == "vectorized":
            pragma = self.d.vector_pragma
        elif s.kind == "unrolled":
            pragma = self.d.unroll_pragma
        elif s.lanes > 1 and self.d.group_id is None:
            self.need_shuffles(f"loop {s.var} over lane groups of {s.lanes}")
        elif s.kind in ("gpu_group", "gpu_thread") and self.d.group_id is not None:
            ident, count = (
                (self.d.group_id, self.d.num_groups) if s.kind == "gpu_group" else (self.d.thread_id, self.d.group_size)
            )
            if s.lanes > 1:  # one iteration per lane group of s.lanes consecutive threads
                self.need_shuffles(f"loop {s.var} over lane groups of {s.lanes}")
                ident, count = f"({ident} / {s.lanes})", f"({count} / {s.lanes})"
            init = f"({start}) + {ident}"
            step = f"{s.var} += {count}"
        if pragma:
            out += [line if line.startswith("#") else pad + "  " + line for line in pragma.split("\n")]
        out.append(f"{pad}  for ({it} {s.var} = {init}; {s.var} < {end}; {step}) {{")
        outer_parallel = self.in_parallel
        self.in_parallel = outer_parallel or s.kind == "parallel"
        try:
            out += self.stmt(s.body, depth + 2)
        finally:
            self.in_parallel = outer_parallel
        return out + [f"{pad}  }}", f"{pad}}}"]

    # ------------------------------------------------------------------ program
    def params(self) -> list[str]:
        out = []
        for b in self.p.buffers:
            q = [self.d.global_qualifier] if self.d.global_qualifier else []
            if b.read_only:
                q.append(self.d.const_qualifier)
            q.append(f"{self.ctype(b.dtype)}* {self.d.restrict} {b.name}")
            out.append(" ".join(q))
        out += [f"{self.d.int_type} {s.name}" for s in self.p.sizes]
        return out

    def shared_decls(self) -> list[str]:
        """Declarations of the kernel's shared arrays: static, or carved out of the dynamic
        shared buffer when they exceed the dialect's static limit (offsets 16-byte aligned)."""
        allocs = self.shared_allocs
        if _dynamic_bytes(allocs, self.d) == 0:
            return [f"  {self.d.shared_qualifier} {self.ctype(a.dtype)} {a.name}{''.join(f'[{d}]' for d in a.shape)};"
                    for a in allocs]
        out = [f"  {self.d.dynamic_shared_decl}"]
        offset = 0
        for a in allocs:
            t = self.ctype(a.dtype)
            inner = "".join(f"[{d}]" for d in a.shape[1:])
            out.append(f"  {t} (*{a.name}){inner} = ({t} (*){inner})(cx_smem + {offset});")
            offset += _align16(_nbytes(a))
        return out

    def kernel(self, k: ir.Kernel) -> str:
        self.shared_allocs: list[ir.Alloc] = []
        self.used_names: dict[str, int] = {}  # Var name -> uses in the kernel
        self.let_binds: dict[str, int] = {}  # let name -> lets binding it in the kernel
        for n in ir.walk(k.body):
            if isinstance(n, ir.Var):
                self.used_names[n.name] = self.used_names.get(n.name, 0) + 1
            elif isinstance(n, ir.Let):
                self.let_binds[n.var] = self.let_binds.get(n.var, 0) + 1
        body = self.stmt(k.body, 1)
        params = self.params() + [f"{self.d.int_type} {p}" for p in k.params]
        q = f"{self.d.kernel_qualifier} " if self.d.kernel_qualifier else ""
        head = f"{q}void {kernel_symbol(self.p, k.name)}({', '.join(params)})"
        return "\n".join([head + " {"] + self.shared_decls() + body + ["}"])

    def host(self, steps: tuple[ir.Node, ...], depth: int) -> list[str]:
        pad = "  " * depth
        out: list[str] = []
        names = [b.name for b in self.p.buffers] + list(self.p.size_names)
        for st in steps:
            if isinstance(st, ir.Launch):
                args = names + [self.expr(a) for a in st.args]
                out += self.flush(pad) + [f"{pad}{kernel_symbol(self.p, st.kernel)}({', '.join(args)});"]
            elif isinstance(st, ir.HostFor):
                it = self.d.int_type
                start, stop = self.expr(st.start), self.expr(st.stop)
                out += self.flush(pad) + [f"{pad}for ({it} {st.var} = {start}; {st.var} < {stop}; ++{st.var}) {{"]
                out += self.host(st.body, depth + 1) + [f"{pad}}}"]
            else:
                raise RenderError(f"unknown host step {st!r}")
        return out

    def render(self) -> str:
        kernels = [self.kernel(k) for k in self.p.kernels]
        parts = [f"/* Generated by cortex from LoopProgram {self.p.name!r} ({self.d.name} dialect). */"]
        if "float64" in self.p.float_dtypes() and self.d.fp64_pragma:
            parts.append(self.d.fp64_pragma.rstrip("\n"))
        if self.d.prelude:
            parts.append(self.d.prelude.rstrip("\n"))
        if self.uses_grid_barrier and self.d.grid_barrier_prelude:
            parts.append(self.d.grid_barrier_prelude.rstrip("\n"))
        parts += list(self.helpers.values())
        parts += kernels
        if self.d.host_entry:
            head = f"void {entry_symbol(self.p)}({', '.join(self.params())})"
            parts.append("\n".join([head + " {"] + self.host(self.p.host, 1) + ["}"]))
        return "\n\n".join(parts) + "\n"


def _nbytes(a: ir.Alloc) -> int:
    n = {"int32": 4, "bool": 4, "float32": 4, "float64": 8}[a.dtype]
    for d in a.shape:
        n *= d
    return n


def _align16(n: int) -> int:
    return (n + 15) // 16 * 16


def _dynamic_bytes(allocs: list[ir.Alloc], d: Dialect) -> int:
    total = sum(_align16(_nbytes(a)) for a in allocs)
    if d.static_shared_limit is None or total <= d.static_shared_limit:
        return 0
    return total


def dynamic_shared_bytes(program: ir.Program, kernel: str, dialect: str | Dialect) -> int:
    """Bytes of dynamic shared memory the launch of ``kernel`` must request (0: none needed).

    Above CUDA's 48 KiB static limit the runtime must also raise the kernel's
    ``MaxDynamicSharedMemorySize`` attribute to this value before launching."""
    d = get_dialect(dialect)
    if d.shared_qualifier is None:
        return 0
    allocs = [n for n in ir.walk(program.kernel(kernel).body) if isinstance(n, ir.Alloc) and n.scope == "shared"]
    return _dynamic_bytes(allocs, d)


def render(program: ir.Program, dialect: str | Dialect = "c") -> str:
    """C-family source for ``program`` in ``dialect`` ("c", "opencl", "cuda" or a Dialect)."""
    return CRenderer(program, get_dialect(dialect)).render()
