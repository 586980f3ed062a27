"""The ``llvm`` target's description: options, availability checks, backend factory.

*Enabled* when llvmlite is installed (checked with ``find_spec``, without importing it);
*runnable* when llvmlite can initialize its native target for this CPU.
"""

from __future__ import annotations

import importlib.util
from importlib import metadata
from typing import Any, Mapping

from cortex.core.plugin.backend import Backend
from cortex.core.plugin.distribution import pip_install
from cortex.core.plugin.targets import Availability, Target, TargetOption

PACKAGE = "llvmlite"  # the Python package code generation needs
FIX = pip_install("llvm")


def _cpu_name_problem(value: str) -> str | None:
    if not value or any(ch.isspace() for ch in value):
        return "a CPU name is one word"
    return None


OPTIONS = (
    TargetOption("threads", int, 0, "CPU threads for the node loops; 0 uses every usable CPU",
                 minimum=0, allowed="an integer >= 0 (0 = every usable CPU)"),
    TargetOption("opt_level", int, 3, "LLVM optimization level", choices=(0, 1, 2, 3)),
    TargetOption("cpu", str, "host", "CPU to generate code for",
                 check=_cpu_name_problem,
                 allowed="'host' or an LLVM CPU name such as 'skylake-avx512'"),
    TargetOption("pin", bool, False, "pin worker thread t of the team to the t-th usable CPU"),
    TargetOption("profile", bool, False, "profiling build: cycle counts per thread at every barrier "
                 "(CompiledProgram.profile(); tools/llvm_profile.py)"),
)


def enabled() -> Availability:
    if importlib.util.find_spec(PACKAGE) is None:
        return Availability.no(f"{PACKAGE} is not installed", FIX)
    try:
        version = metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        version = "(unknown version)"
    return Availability.yes(f"{PACKAGE} {version} found")


def runnable() -> Availability:
    state = enabled()
    if not state:
        return state
    try:
        import llvmlite.binding as llvm

        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        triple, cpu = llvm.get_process_triple(), llvm.get_host_cpu_name()
    except Exception as exc:  # a broken llvmlite install must be reported, not raised
        return Availability.no(f"llvmlite cannot target this CPU ({exc})", FIX)
    return Availability.yes(f"host CPU {cpu} ({triple})")


def environment_info() -> dict[str, str]:
    if not enabled():
        return {"llvmlite": "not installed"}
    import llvmlite.binding as llvm

    return {
        "llvmlite": metadata.version("llvmlite"),
        "LLVM": ".".join(map(str, llvm.llvm_version_info)),
        "LLVM host CPU": llvm.get_host_cpu_name(),
    }


def create_backend(options: Mapping[str, Any]) -> Backend:
    from cortex.plugins.cpu_llvm.backend import create_backend as create

    return create(options)


def make_target() -> Target:
    return Target(
        name="llvm",
        aliases=("cpu",),
        description="host CPU through llvmlite: LLVM IR, JIT, vectorized, multi-threaded",
        backend=create_backend,
        options=OPTIONS,
        enabled=enabled,
        runnable=runnable,
    )
