"""OpenCL C rendering and building: LoopProgram -> OpenCL C (core renderer) -> cl.Program.

Pipeline position: the codegen and compile stages of the ``opencl`` backend.

* :class:`OpenCLRenderer` adds the single-work-group kernel (``forms.with_single_group``) to
  the scheduled per-level program and renders both with the core's C-family renderer in the
  ``opencl`` dialect (``cortex.core.render.c_family``; no renderer of its own). The result is an
  :class:`OpenCLSource`: the OpenCL C text (what ``dump=`` writes and the cache key hashes)
  carrying the program it came from, which the runtime needs for its host steps.
* :class:`OpenCLCompiler` builds it with pyopencl for the chosen device, once per source and
  flags in a process, and keeps the program binary in the disk cache's ``opencl`` namespace
  (:mod:`cortex.core.diskcache`), keyed by the source, the flags, the device, its driver and
  pyopencl's version: a later process builds from the binary. A build failure raises
  :class:`OpenCLBuildError` with the driver's build log and the source lines it names (the
  whole source is the error's ``source``; nothing is left in the temporary directory).
"""

from __future__ import annotations

import re
from importlib import metadata
from typing import Any, Mapping

from cortex.core import loopir as ir
from cortex.core.plugin.backend import Compiler, Renderer, Source
from cortex.core.diskcache import DiskCache, digest
from cortex.core.errors import CortexError
from cortex.core.loopir.verify import verify
from cortex.core.render import c_family as render_c
from cortex.core.render.dialects import get_dialect
from cortex.core.lowering.jam import jam_nodes, weights_to_transpose
from cortex.core.lowering.transforms import change_layout
from cortex.plugins.opencl import forms
from cortex.plugins.opencl.device import Device
from cortex.plugins.opencl.runtime import FORMS, CompiledProgram

#: Changes whenever the generated code or build flags change for the same program.
CODEGEN_REVISION = "4"
#: The disk cache namespace of program binaries.
CACHE_NAMESPACE = "opencl"
#: With ``fast_math`` (the default): let the driver reassociate float sums, so a GEMV row's dot
#: product vectorizes (without it each dot product is one serial chain of dependent adds).
FAST_MATH_OPTIONS: tuple[str, ...] = ("-cl-unsafe-math-optimizations",)


#: The core renderer's float32 sigmoid helper, and what ``fast_math`` puts in its place.
SIGMOID_HELPER = "inline float cx_sigmoid_float32(float x) { return 1.0f / (1.0f + exp(-x)); }"
#: exp(-x) inline: range reduction by ln 2 (Cody-Waite, two constants), a degree-6 polynomial
#: on [-ln2/2, ln2/2], the power of two added to the exponent bits; |rel. error| ~1e-7 for
#: x in [-87, 88] (clamped outside, where the sigmoid is 0 or 1 in float32 anyway). Written with
#: plain * and + (PoCL's ``mad``/``exp`` are calls its loop vectorizer cannot widen): on PoCL's
#: CPU device a loop of these vectorizes, 0.8 ns per sigmoid against 7.5-11 ns with ``exp``.
FAST_SIGMOID_HELPER = """inline float cx_sigmoid_float32(float x) {
  float t = -x;
  t = t < -87.0f ? -87.0f : (t > 88.0f ? 88.0f : t);
  const int ki = (int)(t * 1.44269504088896341f + (t > 0.0f ? 0.5f : -0.5f));
  const float k = (float)ki;
  float r = t - k * 0.693145751953125f;
  r = r - k * 1.428606765330187045e-06f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  return 1.0f / (1.0f + as_float(as_int(p) + (ki << 23)));
}"""


#: Lanes of an OpenCL vector statement (``vectorized`` loops of these trip counts).
VECTOR_TRIPS = (2, 3, 4, 8, 16)


def _lane_coefficient(e: ir.Expr, lane: str) -> int | None:
    """``c`` when ``e`` is ``c * lane + (lane-free)``; None when it is not affine in ``lane``."""
    if lane not in {n.name for n in ir.walk(e) if isinstance(n, ir.Var)}:
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
    """The core C-family renderer plus OpenCL vector statements: a ``vectorized`` loop of 2-16
    iterations whose body is stores, where every access that depends on the loop variable is
    contiguous in it (last index ``lane + ...``, the others lane-free) and only ``+ - *`` combine
    lane-dependent values, is written as ONE statement on an OpenCL vector type (lane-free values
    are scalars, which OpenCL C widens). The vector type is a typedef with the element's
    alignment, so the loads and stores are unaligned vector moves: PoCL's ``vload``/``vstore``
    are library calls its compiler does not inline (measured: every accumulator spilled).
    Any other loop renders as the core renderer writes it.

    ``min_vector_bits`` > 0 marks every kernel ``__attribute__((min_vector_width(N)))`` (clang,
    so PoCL): without it LLVM splits a 16-float vector into two 256-bit halves on an AVX-512
    CPU, and a jammed loop's 20 accumulators then need 40 registers (measured: 40 spill loads
    and stores per step); with it they stay 20 zmm registers."""

    min_vector_bits = 0

    def kernel(self, k: ir.Kernel) -> str:
        text = super().kernel(k)
        if self.min_vector_bits and text.startswith("__kernel void"):
            text = f"__kernel __attribute__((min_vector_width({self.min_vector_bits}))) void" + text[len("__kernel void"):]
        return text

    def vector_type(self, dtype: str, lanes: int) -> str:
        t = self.ctype(dtype)
        name = f"cx_v{t}{lanes}"
        if name not in self.helpers:
            size = 8 if dtype == "float64" else 4
            self.helpers[name] = (f"typedef {t} {name} __attribute__((ext_vector_type({lanes}), "
                                  f"aligned({size})));")
        return name

    def _pointer(self, buffer: str, vt: str, index: tuple[ir.Expr, ...], read: bool) -> str:
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

    def _vector_ok(self, e: ir.Expr, lane: str, dtype: str) -> bool:
        if lane not in {n.name for n in ir.walk(e) if isinstance(n, ir.Var)}:
            return not any(isinstance(n, ir.Reduce) for n in ir.walk(e))
        if isinstance(e, ir.Load):
            return self.dtypes.get(e.buffer) == dtype and self._contiguous(e.index, lane)
        if isinstance(e, ir.BinOp) and e.op in ("+", "-", "*"):
            return self._vector_ok(e.a, lane, dtype) and self._vector_ok(e.b, lane, dtype)
        return False

    def _vexpr(self, e: ir.Expr, lane: str, start: ir.Expr, vt: str) -> str:
        if lane not in {n.name for n in ir.walk(e) if isinstance(n, ir.Var)}:
            return self.expr(e)
        if isinstance(e, ir.Load):
            index = tuple(ir.substitute(i, {lane: start}) for i in e.index)
            return self._pointer(e.buffer, vt, index, read=True)  # type: ignore[arg-type]
        assert isinstance(e, ir.BinOp)
        return f"({self._vexpr(e.a, lane, start, vt)} {e.op} {self._vexpr(e.b, lane, start, vt)})"

    def loop(self, s: ir.For, depth: int) -> list[str]:
        start, stop = ir.const_int(s.start), ir.const_int(s.stop)
        stores = list(s.body.stmts) if isinstance(s.body, ir.Seq) else [s.body]
        if (s.kind != "vectorized" or start is None or stop is None or stop - start not in VECTOR_TRIPS
                or not all(isinstance(x, ir.Store) for x in stores)):
            return super().loop(s, depth)
        lanes, lane = stop - start, s.var
        for st in stores:
            dtype = self.dtypes.get(st.buffer)  # type: ignore[union-attr]
            if (dtype not in ir.FLOAT_DTYPES or not self._contiguous(st.index, lane)  # type: ignore[union-attr]
                    or not self._vector_ok(st.value, lane, dtype)):  # type: ignore[union-attr]
                return super().loop(s, depth)
        pad = "  " * depth
        out: list[str] = []
        first = ir.Const(start, ir.INT)
        for st in stores:
            dtype = self.dtypes[st.buffer]  # type: ignore[union-attr]
            vt = self.vector_type(dtype, lanes)
            index = tuple(ir.substitute(i, {lane: first}) for i in st.index)  # type: ignore[union-attr]
            target = self._pointer(st.buffer, vt, index, read=False)  # type: ignore[union-attr, arg-type]
            value = self._vexpr(st.value, lane, first, vt)  # type: ignore[union-attr]
            if lane not in {n.name for n in ir.walk(st.value) if isinstance(n, ir.Var)}:  # type: ignore[union-attr]
                value = f"(({vt})({value}))"
            out += self.flush(pad) + [f"{pad}{target} = {value};"]
        return out


def render(program: ir.Program, min_vector_bits: int = 0) -> str:
    """OpenCL C for ``program``: the core renderer in the ``opencl`` dialect, with vector
    statements for vectorizable ``vectorized`` loops (:class:`_VectorRenderer`)."""
    r = _VectorRenderer(program, get_dialect("opencl"))
    r.min_vector_bits = min_vector_bits
    return r.render()


class OpenCLBuildError(CortexError, RuntimeError):
    """The OpenCL compiler rejected the generated source (the message has the build log and the
    lines it names; ``source`` is the whole text, ``log`` the driver's log)."""

    def __init__(self, message: str, log: str, source: str) -> None:
        self.log, self.source = log, source
        super().__init__(message)


class OpenCLSource(str):
    """OpenCL C text that carries the program it was rendered from, and the layouts the
    renderer gave params (``{name: Buffer.layout}``; the runtime converts them on upload)."""

    program: ir.Program
    relayout: dict[str, tuple]

    def __new__(cls, text: str, program: ir.Program, relayout: dict[str, tuple] | None = None) -> "OpenCLSource":
        out = super().__new__(cls, text)
        out.program = program
        out.relayout = dict(relayout or {})
        return out


def add_single_group(program: ir.Program) -> ir.Program:
    """``program`` with its single-work-group kernel when one can be derived and verified
    (a program that needs a grid barrier must have it: then failure is an error)."""
    try:
        out = forms.with_single_group(program)
        single = ir.Program(program.name, program.sizes, program.buffers,
                            (out.kernel(forms.SINGLE_KERNEL),), (ir.Launch(forms.SINGLE_KERNEL),))
        verify(single)
        return out
    except (ValueError, ir.LoopIRError):
        if forms.needs_single_group(program):
            raise
        return program


class OpenCLRenderer(Renderer):
    """Scheduled LoopProgram -> :class:`OpenCLSource` (per-level kernels + single-group kernel).

    With ``fast_math`` the float sums are also split into independent partial sums
    (``forms.split_reductions``), a reassociation the build flags allow anyway.
    ``float_lanes``: float32 lanes of the device's SIMD registers (the jammed work unit's width:
    16 with AVX-512, 8 with AVX2); ``clang_cpu``: the device compiles with clang for a CPU
    (PoCL), which takes ``min_vector_width`` (see :class:`_VectorRenderer`); ``jam``: apply
    :func:`jam_for_opencl` (CPU devices: its vector statements use clang's ``ext_vector_type``,
    and a GPU's grid schedule has no CPU-style node loop to jam anyway)."""

    cache_sources = True  # a pure function of the program and the four settings above

    def __init__(self, fast_math: bool = True, float_lanes: int = 16, clang_cpu: bool = False,
                 jam: bool = True) -> None:
        self.fast_math = fast_math
        self.jam = jam
        self.float_lanes = float_lanes if float_lanes in (4, 8, 16) else 16
        self.clang_cpu = clang_cpu

    def render(self, program: Any) -> Source:
        if not isinstance(program, ir.Program):
            raise TypeError(f"the opencl renderer takes a LoopProgram, not {type(program).__name__}")
        if self.jam:
            jammed, changed, relayout = jam_for_opencl(program, self.float_lanes)
        else:
            jammed, changed, relayout = program, frozenset(), {}
        shaped = forms.to_work_groups(forms.chunk_nodes(jammed, skip=changed))
        if self.fast_math:
            shaped = forms.split_reductions(forms.tanh_via_sigmoid(forms.hoist_guards(shaped)))
        full = add_single_group(shaped)
        if forms.needs_single_group(program):  # its kernels' grid barriers are unusable here
            full = ir.Program(program.name, program.sizes, program.buffers,
                              (full.kernel(forms.SINGLE_KERNEL),), ())
        text = render(full, self.float_lanes * 32 if self.clang_cpu and changed else 0)
        if self.fast_math:
            text = text.replace(SIGMOID_HELPER, FAST_SIGMOID_HELPER)
        return OpenCLSource(text, full, relayout)


def jam_for_opencl(program: ir.Program, float_lanes: int = 16) -> tuple[ir.Program, frozenset[str], dict[str, tuple]]:
    """``core.jam.jam_nodes`` for this backend: the weights its fused sums read stored
    transposed first (so a block of hidden units is one vector load per step; the runtime
    converts those params on upload: the returned layouts), one SIMD register of hidden units
    per work-item (``float_lanes`` float32 or half as many float64 lanes). Returns the program, the
    kernels that were jammed, and ``{param: layout}`` for the params it re-laid out."""
    names = weights_to_transpose(program)
    vector = max(2, float_lanes // 2) if "float64" in program.float_dtypes() else float_lanes
    relaid = program
    for name in names:
        rows = ir.const_int(program.buffer(name).shape[0])
        if rows is not None and rows % vector == 0:  # blocks of `vector` rows, each [K, vector]
            relaid = change_layout(relaid, name, "packed", vector)
        else:
            relaid = change_layout(relaid, name, "transposed")
    jammed, changed = jam_nodes(relaid, vector=vector)
    if not changed:
        return program, changed, {}
    return jammed, changed, {n: jammed.buffer(n).layout for n in names}


def lines_named(text: str, log: str, context: int = 2) -> str:
    """The lines of ``text`` that ``log`` names (``<file>:LINE:COL``), numbered, with
    ``context`` lines around each; empty when it names none."""
    lines = text.splitlines()
    wanted = sorted({int(m) for m in re.findall(r":(\d+):\d+:", log) if 0 < int(m) <= len(lines)})
    shown: list[int] = []
    for n in wanted[:8]:
        shown += [i for i in range(max(1, n - context), min(len(lines), n + context) + 1) if i not in shown]
    return "\n".join(f"{i:5d}  {lines[i - 1]}" for i in sorted(shown))


class OpenCLCompiler(Compiler):
    """Builds an :class:`OpenCLSource` for one device; artifacts are :class:`CompiledProgram`."""

    def __init__(self, device: Device, cache: DiskCache | None = None) -> None:
        self.device = device
        try:
            version = metadata.version("pyopencl")
        except metadata.PackageNotFoundError:
            version = "?"
        info = device.info
        self.identity = f"cortex-opencl {CODEGEN_REVISION}; pyopencl {version}; {info.label}; {info.driver}"
        self.cache = cache if cache is not None else DiskCache(CACHE_NAMESPACE)
        self._built: dict[tuple[str, tuple[str, ...]], Any] = {}
        self.builds = 0  # builds from source (the rest came from a binary or this process)

    def build(self, text: str, name: str, options: tuple[str, ...] = ()) -> Any:
        """The ``cl.Program`` for ``text`` built with ``options``: once per pair in this
        process, from the cached binary when there is one (a binary the driver rejects is
        built again from source)."""
        found = self._built.get((text, options))
        if found is not None:
            return found
        key = digest("cortex-opencl-binary 1", self.identity, text, "\0".join(options))
        binary = self.cache.get(key)
        built = self._from_binary(binary, options) if binary is not None else None
        if built is None:
            built = self._from_source(text, name, options)
            self.builds += 1
            try:
                binaries = built.get_info(_cl().program_info.BINARIES)
            except Exception:  # noqa: BLE001 - a driver without binaries is not cached
                binaries = []
            if len(binaries) == 1 and binaries[0]:
                self.cache.put(key, bytes(binaries[0]))
        self._built[(text, options)] = built
        return built

    def _from_binary(self, binary: bytes, options: tuple[str, ...]) -> Any:
        cl = _cl()
        try:
            program = cl.Program(self.device.context, [self.device.device], [binary])
            return program.build(options=list(options))
        except Exception:  # noqa: BLE001 - e.g. a driver update: rebuild from source
            return None

    def _from_source(self, text: str, name: str, options: tuple[str, ...]) -> Any:
        program = _cl().Program(self.device.context, text)
        try:
            return program.build(options=list(options))
        except Exception as exc:  # cl.RuntimeError (build failure) or LogicError
            log = _build_log(program, self.device.device, exc)
            named = lines_named(text, log)
            raise OpenCLBuildError(
                f"the OpenCL compiler of {self.device.info.label} rejected the generated source "
                f"for {name!r}; build log:\n{log}" + (f"\n--- the lines it names ---\n{named}" if named else "")
                + "\n(the error's `source` holds the whole text; compile with dump='DIR' to write it)",
                log, text) from None

    def compile(self, source: Source, options: Mapping[str, Any]) -> CompiledProgram:
        program = getattr(source, "program", None)
        if not isinstance(program, ir.Program):
            raise TypeError("the opencl compiler takes what the opencl renderer returns "
                            "(an OpenCLSource), not plain text")
        form = str(options.get("form", "auto"))
        if form not in FORMS:
            raise ValueError(f"form must be one of {FORMS}, got {form!r}")
        flags = FAST_MATH_OPTIONS if options.get("fast_math", True) else ()
        built = self.build(str(source), program.name, flags)
        return CompiledProgram(program, built, self.device,
                               work_group_size=int(options.get("work_group_size", 0) or 0), form=form,
                               relayout=getattr(source, "relayout", None))


def _cl() -> Any:
    import pyopencl as cl

    return cl


def _build_log(program: Any, device: Any, exc: Exception) -> str:
    """The driver's build log for ``device`` (pyopencl's error text when there is none)."""
    import pyopencl as cl

    try:
        log = str(program.get_build_info(device, cl.program_build_info.LOG)).strip()
    except Exception:
        log = ""
    return log or str(exc).strip()
