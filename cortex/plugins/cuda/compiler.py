"""nvcc: CUDA C source -> a cubin for one GPU architecture, cached on disk and in memory.

Pipeline position: the ``compile`` stage of the ``cuda`` backend, between the core's C-family
renderer (``c_family.render(program, "cuda")``, carried in a :class:`CudaSource`) and the
runtime (``runtime.py``), which loads the cubin with the CUDA driver. It needs nvcc only, no GPU:
this is what the compile-only conformance part runs where there is no driver.

The architecture is the target option ``arch``: ``'sm_XY'``, or ``'auto'`` for the GPU's own
(``FALLBACK_ARCH`` when no GPU is visible). The cache key covers nvcc's version, the flags, the
architecture and the source; cubins (with ptxas's report) are kept in the ``cuda`` namespace of
the disk cache (:mod:`cortex.core.diskcache`: ``$CORTEX_CACHE_DIR/cuda``, by default
``~/.cache/cortex/cuda``; checked entries in a private directory) so a second process does
not run nvcc again.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from cortex.core import loopir as ir
from cortex.core.diskcache import DiskCache
from cortex.core.errors import CortexError
from cortex.core.plugin import hostinfo
from cortex.core.plugin.backend import Compiler, Source

#: Flags every compilation gets. No fast-math: results must match the float64 reference to the
#: conformance tolerance, and ``tanhf``/``expf`` approximations would eat into it.
NVCC_FLAGS = ("-O3", "-std=c++17", "-Xptxas", "-v")
CODEGEN_REVISION = "cortex-cuda 1"  # bump when the flags or the artifact's form change
CACHE_NAMESPACE = "cuda"


class NvccError(CortexError, RuntimeError):
    """nvcc is missing or rejected the generated source (the message holds its output)."""


class CudaSource(str):
    """Rendered CUDA C (a ``str``, so it can be dumped and hashed) that carries the scheduled
    :class:`~cortex.core.loopir.Program` it was rendered from: the runtime needs the program's
    host steps, buffers and sizes to launch the kernels."""

    program: ir.Program

    def __new__(cls, text: str, program: ir.Program) -> "CudaSource":
        obj = super().__new__(cls, text)
        obj.program = program
        return obj


@dataclass(frozen=True)
class Cubin:
    """A compiled module: the cubin image, the architecture it is for and ptxas's report
    (registers, shared memory, spills per kernel)."""

    image: bytes
    arch: str
    ptxas_log: str
    program: ir.Program | None = None  # the program it runs (None for bare sources)

    def resources(self) -> dict[str, dict[str, int]]:
        """Per kernel symbol: ``registers``, ``shared_bytes``, ``spill_stores``, ``stack_bytes``."""
        out: dict[str, dict[str, int]] = {}
        current = None
        for line in self.ptxas_log.splitlines():
            m = re.search(r"Compiling entry function '(\w+)'", line) or re.search(r"Function properties for (\w+)", line)
            if m:
                current = out.setdefault(m.group(1), {})
                continue
            if current is None:
                continue
            for key, pattern in (("registers", r"Used (\d+) registers"), ("shared_bytes", r"(\d+) bytes smem"),
                                 ("spill_stores", r"(\d+) bytes spill stores"),
                                 ("stack_bytes", r"(\d+) bytes stack frame")):
                m = re.search(pattern, line)
                if m:
                    current[key] = int(m.group(1))
        return out


def cache_dir() -> Path:
    """Where cubins are cached (the ``cuda`` namespace of :mod:`cortex.core.diskcache`)."""
    return DiskCache(CACHE_NAMESPACE).path


def pack(cubin: Cubin) -> bytes:
    """A cache entry: the ptxas log's length, the log, the image."""
    log = cubin.ptxas_log.encode()
    return len(log).to_bytes(8, "little") + log + cubin.image


def unpack(data: bytes, arch: str) -> Cubin | None:
    n = int.from_bytes(data[:8], "little") if len(data) >= 8 else -1
    if n < 0 or 8 + n > len(data):
        return None
    return Cubin(data[8 + n:], arch, data[8:8 + n].decode(errors="replace"))


def resolve_arch(arch: str, device_arch: Callable[[], str | None] | None = None) -> str:
    """The ``sm_XY`` to compile for: ``arch`` itself, or for ``'auto'`` the GPU's
    (``device_arch()``), else :data:`device.FALLBACK_ARCH`."""
    from cortex.plugins.cuda.device import FALLBACK_ARCH, parse_arch

    if arch != "auto":
        parse_arch(arch)
        return arch
    found = device_arch() if device_arch is not None else None
    return found or FALLBACK_ARCH


def _nvcc() -> str:
    nvcc = hostinfo.find_nvcc()
    if nvcc is None:
        raise NvccError("nvcc (the CUDA toolkit) was not found on PATH or in CUDA_HOME; "
                        "install the CUDA toolkit to compile for target 'cuda'")
    return nvcc


def nvcc_command(source_path: Path, output_path: Path, arch: str) -> list[str]:
    return [_nvcc(), "-cubin", f"-arch={arch}", *NVCC_FLAGS, str(source_path), "-o", str(output_path)]


def run_nvcc(text: str, arch: str, timeout: float = 600.0) -> tuple[bytes, str]:
    """Compile ``text`` to a cubin for ``arch``; returns (image, ptxas log). Raises NvccError."""
    with tempfile.TemporaryDirectory(prefix="cortex-nvcc-") as tmp:
        src, out = Path(tmp) / "kernel.cu", Path(tmp) / "kernel.cubin"
        src.write_text(text)
        try:
            proc = subprocess.run(nvcc_command(src, out, arch), capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise NvccError(f"nvcc did not finish within {timeout:.0f} s") from None
        log = (proc.stdout + proc.stderr).strip()
        if proc.returncode != 0:
            numbered = "\n".join(f"{i + 1:5d}  {line}" for i, line in enumerate(text.splitlines()))
            raise NvccError(f"nvcc -arch={arch} failed on the generated CUDA source:\n{log}\n"
                            f"--- source ---\n{numbered}")
        return out.read_bytes(), log


def run_nvcc_many(texts: Mapping[str, str], arch: str, timeout: float = 600.0) -> dict[str, tuple[bytes, str]]:
    """Compile several sources (``{name: text}``, names usable as file stems) in one nvcc run."""
    if not texts:
        return {}
    with tempfile.TemporaryDirectory(prefix="cortex-nvcc-") as tmp:
        files = []
        for name, text in texts.items():
            path = Path(tmp) / f"k{name}.cu"
            path.write_text(text)
            files.append(path)
        cmd = [_nvcc(), "-cubin", f"-arch={arch}", *NVCC_FLAGS, "-odir", tmp, *map(str, files)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=tmp)
        except subprocess.TimeoutExpired:
            raise NvccError(f"nvcc did not finish within {timeout:.0f} s") from None
        log = (proc.stdout + proc.stderr).strip()
        if proc.returncode != 0:
            raise NvccError(f"nvcc -arch={arch} failed on generated CUDA sources "
                            f"({', '.join(p.name for p in files)}):\n{log}")
        return {name: (path.with_suffix(".cubin").read_bytes(), log) for name, path in zip(texts, files)}


class NvccCompiler(Compiler):
    """The ``cuda`` backend's compiler. ``device_arch`` reports the GPU's ``sm_XY`` for
    ``arch='auto'`` (None when there is no GPU)."""

    def __init__(self, device_arch: Callable[[], str | None] | None = None, use_disk_cache: bool = True) -> None:
        self.device_arch = device_arch
        self.use_disk_cache = use_disk_cache
        self._memory: dict[str, Cubin] = {}
        self.nvcc_runs = 0  # how many times nvcc actually ran (the rest were cache hits)

    @property
    def identity(self) -> str:  # type: ignore[override]
        return f"{CODEGEN_REVISION}; nvcc {hostinfo.nvcc_version() or 'unknown'}; {' '.join(NVCC_FLAGS)}"

    def arch(self, options: Mapping[str, Any]) -> str:
        return resolve_arch(str(options.get("arch", "auto")), self.device_arch)

    def cache_key(self, source: Source, options: Mapping[str, Any]) -> str:
        # the resolved architecture, not 'auto', decides what nvcc produces
        return super().cache_key(source, {**dict(options), "arch": self.arch(options)})

    def compile(self, source: Source, options: Mapping[str, Any]) -> Cubin:
        if isinstance(source, bytes):
            raise TypeError("the cuda compiler takes CUDA C text (what the cuda renderer returns), not bytes")
        arch = self.arch(options)
        key = self.cache_key(source, options)
        program = getattr(source, "program", None)
        cubin = self._memory.get(key)
        if cubin is None:
            cubin = self._load(key, arch)
        if cubin is None:
            image, log = run_nvcc(str(source), arch)
            self.nvcc_runs += 1
            cubin = Cubin(image, arch, log)
            self._store(key, cubin)
        self._memory[key] = cubin
        return Cubin(cubin.image, cubin.arch, cubin.ptxas_log, program)

    def compile_many(self, sources: Sequence[Source], options: Mapping[str, Any], jobs: int | None = None) -> list[Cubin]:
        """Compile several sources: those not cached go to nvcc in ``jobs`` parallel processes,
        each compiling a share of the files in one invocation (nvcc's start-up dominates small
        kernels). Each cubin's ``ptxas_log`` is its invocation's log (kernel symbols are unique
        per program, so :meth:`Cubin.resources` still finds its own kernels). When a source
        fails, the others are still compiled and cached, then the first failure is raised."""
        arch = self.arch(options)
        keys = [self.cache_key(s, options) for s in sources]
        todo: dict[str, str] = {}
        for key, src in zip(keys, sources):
            if key not in self._memory:
                cached = self._load(key, arch)
                if cached is not None:
                    self._memory[key] = cached
                else:
                    todo[key] = str(src)
        if todo:
            jobs = max(1, min(len(todo), jobs or hostinfo.cpu_count()))
            items = list(todo.items())
            chunks = [dict(items[i::jobs]) for i in range(jobs)]

            def build(chunk: dict[str, str]) -> dict[str, tuple[bytes, str] | NvccError]:
                try:
                    return dict(run_nvcc_many(chunk, arch))
                except NvccError:  # find the culprit(s): the others still compile and cache
                    out: dict[str, tuple[bytes, str] | NvccError] = {}
                    for key, text in chunk.items():
                        try:
                            out[key] = run_nvcc(text, arch)
                        except NvccError as e:
                            out[key] = e
                    return out

            errors = []
            with ThreadPoolExecutor(max_workers=jobs) as pool:
                for built in pool.map(build, chunks):
                    for key, result in built.items():
                        if isinstance(result, NvccError):
                            errors.append(result)
                            continue
                        self.nvcc_runs += 1
                        cubin = Cubin(result[0], arch, result[1])
                        self._store(key, cubin)
                        self._memory[key] = cubin
            if errors:
                raise errors[0]
        out = []
        for key, src in zip(keys, sources):
            c = self._memory[key]
            out.append(Cubin(c.image, c.arch, c.ptxas_log, getattr(src, "program", None)))
        return out

    # ------------------------------------------------------------------ disk cache
    def _load(self, key: str, arch: str) -> Cubin | None:
        if not self.use_disk_cache:
            return None
        data = DiskCache(CACHE_NAMESPACE, suffix=".cubin").get(key)
        return unpack(data, arch) if data is not None else None

    def _store(self, key: str, cubin: Cubin) -> None:
        if self.use_disk_cache:  # checked, atomic; an unwritable cache says so once
            DiskCache(CACHE_NAMESPACE, suffix=".cubin").put(key, pack(cubin))
