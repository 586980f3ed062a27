"""OpenCL C rendering and building: LoopProgram -> OpenCL C (core renderer) -> cl.Program.

Pipeline position: the codegen and compile stages of the ``opencl`` backend.

* :class:`OpenCLRenderer` maps the scheduled program's parallel loops onto work-groups, adds the
  single-work-group kernel (``forms.with_single_group``) to the per-level program and renders
  both with the core's C-family renderer in the ``opencl`` dialect (``cortex.core.render.c_family``)
  plus vector statements; the schedule made every loop-shape decision before. The result is an
  :class:`OpenCLSource`: the OpenCL C text (what ``dump=`` writes and the cache key hashes)
  carrying the program it came from, which the runtime needs for its host steps.
* :class:`OpenCLCompiler` builds it with pyopencl for the chosen device, once per source and
  flags in a process, and keeps the program binary in the disk cache's ``opencl`` namespace
  (:mod:`cortex.core.diskcache`), keyed by the source, the flags, the device, its driver and
  pyopencl's version: a later process builds from the binary. Where the driver caches its
  builds itself (PoCL), the binary is not asked for at build time (PoCL would compile every
  kernel once more to make it); it is made when the executable is saved or pickled, and a
  later process builds from source, a hit in the driver's cache. A build failure raises
  :class:`OpenCLBuildError` with the driver's build log and the source lines it names (the
  whole source is the error's ``source``; nothing is left in the temporary directory).
"""

from __future__ import annotations

import functools
import re
from dataclasses import replace
from importlib import metadata
from typing import Any, Mapping

from cortex.core import loopir as ir
from cortex.core.plugin.backend import Compiler, Renderer, Source
from cortex.core.diskcache import DiskCache, digest
from cortex.core.errors import CortexError
from cortex.core.loopir.verify import verify
from cortex.plugins.opencl import forms, shared
from cortex.plugins.opencl.accumulators import split_accumulators
from cortex.plugins.opencl.device import Device
from cortex.plugins.opencl.vectors import render
from cortex.plugins.opencl.runtime import FORMS, CompiledProgram

#: Changes whenever the generated code or build flags change for the same program.
CODEGEN_REVISION = "5"  # 5: rows through their row pointers in vector statements; 64-lane statements
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


class OpenCLBuildError(CortexError, RuntimeError):
    """The OpenCL compiler rejected the generated source (the message has the build log and the
    lines it names; ``source`` is the whole text, ``log`` the driver's log)."""

    def __init__(self, message: str, log: str, source: str) -> None:
        self.log, self.source = log, source
        super().__init__(message)


class OpenCLSource(str):
    """OpenCL C text that carries the program it was rendered from (the runtime runs its host
    steps and reads its launch settings)."""

    program: ir.Program

    def __new__(cls, text: str, program: ir.Program) -> "OpenCLSource":
        out = super().__new__(cls, text)
        out.program = program
        return out


def add_single_group(program: ir.Program) -> ir.Program:
    """``program`` with its single-work-group kernel when one can be derived and verified
    (a program that needs a grid barrier must have it: then failure is an error)."""
    try:
        out = forms.with_single_group(program)
        single = replace(program, kernels=(out.kernel(forms.SINGLE_KERNEL),), host=(ir.Launch(forms.SINGLE_KERNEL),))
        verify(single)
        return out
    except (ValueError, ir.LoopIRError):
        if forms.needs_single_group(program):
            raise
        return program


def add_tree_groups(program: ir.Program) -> ir.Program:
    """``program`` with its tree-group kernel (``forms.grouped_kernel``) when the schedule
    records ``tree_groups`` of at least 2 and the kernel can be derived and verified; else
    ``program`` (its calls then run as one work-group, as before)."""
    if int(dict(program.launch).get("tree_groups", 1)) < 2 or forms.needs_single_group(program):
        return program
    try:
        kernel = forms.grouped_kernel(program)
        verify(forms.grouped_check_program(program))
    except (ValueError, ir.LoopIRError):
        return program
    return replace(program, kernels=program.kernels + (kernel,))


def add_shared_levels(program: ir.Program) -> ir.Program:
    """``program`` with its shared-levels kernel (``shared.shared_kernel``: one tree's levels
    on ``level_groups`` work-groups that claim each level's units) when the schedule records
    ``level_groups`` of at least 2 and the kernel can be derived and verified; else
    ``program`` (one tree then runs as one work-group, as before)."""
    if int(dict(program.launch).get("level_groups", 1)) < 2 or forms.needs_single_group(program):
        return program
    try:
        kernel = shared.shared_kernel(program)
        verify(replace(program, kernels=(kernel,), host=(ir.Launch(kernel.name),)))
    except (ValueError, ir.LoopIRError):
        return program
    return replace(program, kernels=program.kernels + (kernel,))


class OpenCLRenderer(Renderer):
    """Scheduled LoopProgram -> :class:`OpenCLSource` (per-level kernels + single-group kernel).

    It translates: the schedule already made every loop-shape decision (the node jam, node
    chunks, packed weights: ``cortex.core.lowering.apply_schedule``). With ``fast_math`` the float sums are
    also split into independent partial sums (``forms.split_reductions``), guards hoisted out of
    sums, ``fma`` written as a multiply-add the driver contracts and ``tanh`` with the fast
    sigmoid, rewrites the build flags allow anyway.
    ``clang_cpu``: the device compiles with clang for a CPU (PoCL), which takes
    ``min_vector_width`` for kernels whose vector statements hold a jam's accumulators (see
    :class:`_VectorRenderer`); ``float_lanes``: the float32 lanes of its SIMD registers."""

    cache_sources = True  # a pure function of the program and the three settings below

    def __init__(self, fast_math: bool = True, float_lanes: int = 16, clang_cpu: bool = False) -> None:
        self.fast_math = fast_math
        self.float_lanes = float_lanes if float_lanes in (4, 8, 16) else 16
        self.clang_cpu = clang_cpu

    def render(self, program: Any) -> Source:
        if not isinstance(program, ir.Program):
            raise TypeError(f"the opencl renderer takes a LoopProgram, not {type(program).__name__}")
        shaped = forms.sink_into_selects(forms.to_work_groups(forms.split_phases(program)))
        if self.fast_math:
            shaped = forms.hoist_guards(shaped)
            shaped = forms.split_reductions(forms.tanh_via_sigmoid(forms.unfused_fma(split_accumulators(shaped, self.float_lanes * 4))))
        full = add_shared_levels(add_tree_groups(add_single_group(shaped)))
        if forms.needs_single_group(program):  # its kernels' grid barriers are unusable here
            full = replace(full, kernels=(full.kernel(forms.SINGLE_KERNEL),), host=())
        jammed = any(isinstance(n, ir.Alloc) and n.scope == "private" for k in program.kernels for n in ir.walk(k.body))
        text = render(full, self.float_lanes * 32 if self.clang_cpu and jammed else 0)
        if self.fast_math:
            text = text.replace(SIGMOID_HELPER, FAST_SIGMOID_HELPER)
        return OpenCLSource(text, full)


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
        built = self._from_binary(binary, options) if binary else None
        if built is None:
            built = self._from_source(text, name, options)
            self.builds += 1
            if self.device.info.driver_caches_builds:
                # the driver's own cache holds this build for the next process; its binary
                # (another compile of every kernel on PoCL: 2.3x a cold build) is made only
                # when the executable is saved or pickled
                self.cache.carry(key, functools.partial(_binary_of, built))
            else:
                binary = _binary_of(built)
                if binary:
                    self.cache.put(key, binary)
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
                               work_group_size=int(options.get("work_group_size", 0) or 0), form=form)


def _binary_of(built: Any) -> bytes:
    """The program binary of a built ``cl.Program`` (b"" when the driver gives none)."""
    try:
        binaries = built.get_info(_cl().program_info.BINARIES)
    except Exception:  # noqa: BLE001 - a driver without binaries is not cached
        return b""
    return bytes(binaries[0]) if len(binaries) == 1 and binaries[0] else b""


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
