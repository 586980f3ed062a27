"""The ``cc`` backend: render plain C, build a shared library, call it through ctypes.

Pipeline position: the last two stages for target ``cc``.

* renderer — ``cortex.core.render.c_family.render(program, "c")``; the source is a ``str`` that also
  carries what the call needs (entry symbol, buffer dtypes, counts);
* compiler — ``cc -O2 -std=c11 -shared -fPIC`` into a shared library kept in Cortex's disk
  cache (``cortex.core.diskcache``: namespace ``cc``, or the directory ``$CORTEX_CC_CACHE``) as
  ``<cache_key>.so``, an entry with a checksum in a private directory. A library is loaded
  once per key per process, from a private copy of the checked entry (an entry that fails its
  check is compiled again; nothing else under the cache directory is ever loaded);
* runtime — host NumPy arrays are the device buffers; ``launch`` calls the program's
  ``<name>_run`` entry point (every buffer, then every size as a 32-bit int), which runs the
  whole recursion in one native call.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from cortex import Backend, Capabilities, Compiler, HostRuntime, Renderer
from cortex.core.diskcache import DiskCache
from cortex.core.render.c_family import entry_symbol, render

NP_DTYPES = {"float32": np.float32, "float64": np.float64, "int32": np.int32}


class CCompileError(RuntimeError):
    """The C compiler rejected the generated source."""


def compiler_version(cc: str) -> str:
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unavailable ({e})"
    return out.stdout.splitlines()[0] if out.returncode == 0 and out.stdout else "unknown"


class CSource(str):
    """The C text (what ``dump=`` writes and the cache key hashes) plus the calling facts."""

    entry: str
    buffer_dtypes: tuple[str, ...]
    num_sizes: int

    def __new__(cls, program: Any) -> "CSource":
        text = super().__new__(cls, render(program, "c"))
        text.entry = entry_symbol(program)
        text.buffer_dtypes = tuple(b.dtype for b in program.buffers)
        text.num_sizes = len(program.sizes)
        return text


class CRenderer(Renderer):
    def render(self, program: Any) -> CSource:
        return CSource(program)


class Library:
    """A loaded shared library and its entry point, checked at each call."""

    def __init__(self, path: Path, source: CSource) -> None:
        self.path = path
        self.entry = source.entry
        self.dtypes = tuple(np.dtype(NP_DTYPES[d]) for d in source.buffer_dtypes)
        self.num_sizes = source.num_sizes
        self.fn = getattr(ctypes.CDLL(str(path)), source.entry)
        self.fn.restype = None
        self.fn.argtypes = [ctypes.c_void_p] * len(self.dtypes) + [ctypes.c_int32] * self.num_sizes

    def __call__(self, args: tuple[Any, ...]) -> None:
        nb = len(self.dtypes)
        if len(args) != nb + self.num_sizes:
            raise TypeError(f"{self.entry} takes {nb} buffers and {self.num_sizes} sizes, "
                            f"got {len(args)} arguments")
        for i, (a, dt) in enumerate(zip(args[:nb], self.dtypes)):
            if not (isinstance(a, np.ndarray) and a.dtype == dt and a.flags.c_contiguous):
                raise TypeError(f"{self.entry}: argument {i} must be a C-contiguous {dt} array")
        self.fn(*[a.ctypes.data for a in args[:nb]], *[int(s) for s in args[nb:]])


def cache() -> DiskCache:
    """The shared libraries' cache: ``$CORTEX_CC_CACHE`` when set, else Cortex's ``cc`` namespace."""
    return DiskCache("cc", directory=os.environ.get("CORTEX_CC_CACHE") or None, suffix=".so")


def cache_dir() -> Path:
    return cache().path


def load_library(image: bytes, source: CSource) -> Library:
    """``image`` (a checked cache entry) loaded from a private copy, deleted once mapped."""
    with tempfile.TemporaryDirectory(prefix="cortex-cc-") as tmp:  # 0700, ours alone
        path = Path(tmp) / "program.so"
        path.write_bytes(image)
        return Library(path, source)


class CCompiler(Compiler):
    def __init__(self, cc: str) -> None:
        self.cc = shutil.which(cc) or cc
        self.identity = f"cortex-cc {__import__('cortex_cc').__version__}; {compiler_version(self.cc)}"
        self.loaded: dict[str, Library] = {}
        self.builds = 0  # how many times the C compiler actually ran

    def flags(self, options: Mapping[str, Any]) -> list[str]:
        flags = [f"-O{options.get('opt_level', 2)}", "-std=c11", "-shared", "-fPIC"]
        return flags + (["-fopenmp"] if options.get("openmp") else [])

    def compile(self, source: Any, options: Mapping[str, Any]) -> Library:
        if not isinstance(source, CSource):
            raise TypeError("the cc compiler takes what the cc renderer returns (a CSource)")
        key = self.cache_key(source, options)
        if key in self.loaded:
            return self.loaded[key]
        store = cache()
        image = store.get(key)
        if image is None:
            with tempfile.TemporaryDirectory(prefix="cortex-cc-") as tmp:
                c_file, so_file = Path(tmp) / "program.c", Path(tmp) / "program.so"
                c_file.write_text(source)
                cmd = [self.cc, *self.flags(options), str(c_file), "-o", str(so_file), "-lm"]
                done = subprocess.run(cmd, capture_output=True, text=True)
                if done.returncode != 0:
                    raise CCompileError(f"{' '.join(cmd)} failed:\n{done.stderr.strip()}")
                self.builds += 1
                image = so_file.read_bytes()
            store.put(key, image)  # atomic, with a checksum
        self.loaded[key] = load_library(image, source)
        return self.loaded[key]


class CCRuntime(HostRuntime):
    """Host NumPy arrays as buffers (``HostRuntime``); a launch is one native call of the
    whole program."""

    def launch(self, artifact: Library, args: tuple[Any, ...], **launch_config: Any) -> None:
        if launch_config:
            raise TypeError(f"the cc runtime takes no launch configuration, got {launch_config}")
        artifact(args)


def create_backend(options: Mapping[str, Any]) -> Backend:
    caps = Capabilities(
        has_grid=False,
        num_cores=(os.cpu_count() or 1) if options.get("openmp") else 1,
        cache_bytes_per_core=1 << 20,
        vector_bits=128,  # SSE2 / NEON: the baseline every 64-bit host compiler targets
        supports_fp64=True,
        dialect="c",
        single_call=True,
    )
    return Backend(caps, CRenderer(), CCompiler(options.get("cc", "cc")), CCRuntime())
