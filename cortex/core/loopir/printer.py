"""Readable pseudo-code for LoopPrograms (``print(program)``, ``dump=`` files, docs).

Pipeline position: a pure function of the IR (``cortex.core.loopir``), used by every stage
that dumps a LoopProgram. The text is for people; it is not parsed back.
"""

from __future__ import annotations

from cortex.core import loopir as ir

_PREC = {"or": 1, "and": 2, "cmp": 3, "+": 4, "-": 4, "*": 5, "/": 5, "//": 5, "%": 5}


def format_expr(e: ir.Expr) -> str:
    return _expr(e, 0)


def _expr(e: ir.Expr, parent: int) -> str:
    if isinstance(e, ir.Const):
        if e.dtype in ir.FLOAT_DTYPES:
            return f"{float(e.value)!r}" + ("f" if e.dtype == "float32" else "")
        if e.dtype == ir.BOOL:
            return "true" if e.value else "false"
        return str(int(e.value))
    if isinstance(e, ir.Var):
        return e.name
    if isinstance(e, ir.Load):
        return f"{e.buffer}[{', '.join(_expr(i, 0) for i in e.index)}]"
    if isinstance(e, ir.BinOp) and e.op in ("min", "max"):
        return f"{e.op}({_expr(e.a, 0)}, {_expr(e.b, 0)})"
    if isinstance(e, (ir.BinOp, ir.Cmp)):
        p = _PREC["cmp"] if isinstance(e, ir.Cmp) else _PREC[e.op]
        # left-associative: the right operand of - / // % needs parentheses at equal precedence
        s = f"{_expr(e.a, p)} {e.op} {_expr(e.b, p + 1)}"
        return f"({s})" if p < parent else s
    if isinstance(e, ir.Not):
        return f"not {_expr(e.a, 9)}"
    if isinstance(e, ir.Select):
        return f"select({_expr(e.cond, 0)}, {_expr(e.a, 0)}, {_expr(e.b, 0)})"
    if isinstance(e, ir.Cast):
        return f"{e.dtype}({_expr(e.a, 0)})"
    if isinstance(e, ir.Call):
        return f"{e.fn}({', '.join(_expr(a, 0) for a in e.args)})"
    if isinstance(e, ir.Reduce):
        lanes = f" over {e.lanes} lanes" if e.lanes > 1 else ""
        return f"{e.op}({e.var} in {_expr(e.start, 0)}..{_expr(e.stop, 0)}{lanes}: {_expr(e.body, 0)})"
    raise ir.LoopIRError(f"cannot print {e!r}")


def format_stmt(s: ir.Stmt, indent: int = 0) -> str:
    return "\n".join(_stmt(s, indent))


def _stmt(s: ir.Stmt, d: int) -> list[str]:
    pad = "  " * d
    if isinstance(s, ir.Seq):
        return [line for x in s.stmts for line in _stmt(x, d)]
    if isinstance(s, ir.For):
        kind = "" if s.kind == "serial" else f"{s.kind} "
        lanes = f" ({s.lanes} lanes each)" if s.lanes > 1 else ""
        notes = f"  # {', '.join(s.annotations)}" if s.annotations else ""
        head = f"{pad}{kind}for {s.var} in {format_expr(s.start)}..{format_expr(s.stop)}{lanes}:{notes}"
        return [head] + _stmt(s.body, d + 1)
    if isinstance(s, ir.Store):
        idx = ", ".join(format_expr(i) for i in s.index)
        return [f"{pad}{s.buffer}[{idx}] = {format_expr(s.value)}"]
    if isinstance(s, ir.Let):
        return [f"{pad}let {s.var} = {format_expr(s.value)}"] + _stmt(s.body, d)
    if isinstance(s, ir.Alloc):
        dims = ", ".join(map(str, s.shape))
        return [f"{pad}alloc {s.scope} {s.dtype} {s.name}[{dims}]"] + _stmt(s.body, d)
    if isinstance(s, ir.If):
        out = [f"{pad}if {format_expr(s.cond)}:"] + _stmt(s.then, d + 1)
        if s.orelse is not None:
            out += [f"{pad}else:"] + _stmt(s.orelse, d + 1)
        return out
    if isinstance(s, ir.Barrier):
        return [f"{pad}barrier({s.scope})"]
    if isinstance(s, ir.Prefetch):
        idx = ", ".join(format_expr(i) for i in s.index)
        return [f"{pad}prefetch {s.buffer}[{idx}] x {s.count}"]
    raise ir.LoopIRError(f"cannot print statement {s!r}")


def _buffer(b: ir.Buffer) -> str:
    dims = ", ".join(format_expr(x) for x in b.shape)
    line = f"{b.role:6} {b.dtype} {b.name}[{dims}]"
    if b.storage:
        line += f"  stored as {b.storage}"
    if b.value_range is not None:
        lo, hi = b.value_range
        line += f"  values in [{format_expr(lo)}, {format_expr(hi)}]"
    if b.monotone:
        line += ", monotone"
    if b.layout != ("row_major",):
        logical = ", ".join(format_expr(x) for x in (b.logical_shape or ()))
        line += f"  layout {b.layout} of logical [{logical}]"
    return line


def _host(step: ir.Node, d: int) -> list[str]:
    pad = "  " * d
    if isinstance(step, ir.Launch):
        args = ", ".join(format_expr(a) for a in step.args)
        return [f"{pad}launch {step.kernel}({args})"]
    if isinstance(step, ir.HostFor):
        head = f"{pad}for {step.var} in {format_expr(step.start)}..{format_expr(step.stop)}:"
        return [head] + [line for s in step.body for line in _host(s, d + 1)]
    raise ir.LoopIRError(f"cannot print host step {step!r}")


def format_program(p: ir.Program) -> str:
    sizes = []
    for s in p.sizes:
        bound = f"{s.lo} <= {s.name}" + (f" <= {format_expr(s.hi)}" if s.hi is not None else "")
        sizes.append(bound)
    lines = [f"program {p.name}", f"  sizes: {', '.join(sizes)}", "  buffers:"]
    lines += [f"    {_buffer(b)}" for b in p.buffers]
    for k in p.kernels:
        tpg = f"  # {k.threads_per_group} threads/group" if k.threads_per_group > 1 else ""
        lines.append(f"  kernel {k.name}({', '.join(k.params)}):{tpg}")
        lines += _stmt(k.body, 2)
    lines.append("  host:")
    lines += [line for s in p.host for line in _host(s, 2)]
    if p.launch:
        lines.append("  launch: " + ", ".join(f"{k}={v}" for k, v in p.launch))
    return "\n".join(lines)


def format_node(n: ir.Node) -> str:
    if isinstance(n, ir.Program):
        return format_program(n)
    if isinstance(n, ir.Expr):
        return format_expr(n)
    if isinstance(n, ir.Stmt):
        return format_stmt(n)
    if isinstance(n, ir.Buffer):
        return _buffer(n)
    if isinstance(n, ir.Kernel):
        return f"kernel {n.name}({', '.join(n.params)}):\n" + format_stmt(n.body, 1)
    if isinstance(n, (ir.Launch, ir.HostFor)):
        return "\n".join(_host(n, 0))
    return repr(n)
