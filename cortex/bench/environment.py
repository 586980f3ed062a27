"""What the benchmark records about the machine, the libraries and each process's threads.

Pipeline position: outside the compiler pipeline, in ``cortex.bench``. The runner records
:func:`host` and :func:`versions` once (read without importing the peers' libraries, so the
runner's own process never starts a PyTorch or OpenMP thread pool); every worker process
reports :func:`process_threads` after building its contender, so the JSON says how many
threads each contender really ran with.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
DISTRIBUTIONS = ("numpy", "llvmlite", "pyopencl", "pycuda", "torch", "dyNET38",
                 "dynet", "matplotlib", "threadpoolctl", "pluggy")


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def loadavg() -> list[float] | None:
    return [round(v, 2) for v in os.getloadavg()] if hasattr(os, "getloadavg") else None


def memory_gib() -> float | None:
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (AttributeError, ValueError, OSError):
        return None


def git_commit() -> str | None:
    """The commit of the checkout ``cortex`` is imported from, when it is one."""
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True,
                             text=True, timeout=5)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=here, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    commit = out.stdout.strip()
    if out.returncode != 0 or not commit:
        return None
    return commit + ("+dirty" if dirty.stdout.strip() else "")


def host() -> dict[str, Any]:
    """The machine: CPU, cores, memory, OS, Python, load, the thread variables."""
    return {
        "hostname": platform.node(),
        "cpu": cpu_name(),
        "logical_cpus": os.cpu_count(),
        "usable_cpus": usable_cpus(),
        "memory_gib": memory_gib(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "loadavg_at_start": loadavg(),
        "thread_env": {k: os.environ.get(k) for k in THREAD_VARIABLES},
        "git_commit": git_commit(),
    }


def versions() -> dict[str, str | None]:
    """Installed versions of Cortex and of every library a contender may use (None: absent)."""
    from cortex import __version__  # the one running (the package index's `cortex` is another project)

    out: dict[str, str | None] = {"cortex": __version__}
    for name in DISTRIBUTIONS:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            if name not in ("dynet", "dyNET38", "pycuda"):  # alternatives: listed when present
                out[name] = None
    return out


def process_threads() -> dict[str, Any]:
    """The thread pools of this process as they are now: PyTorch's (when imported), the BLAS
    and OpenMP pools (threadpoolctl, when installed) and the live thread count."""
    info: dict[str, Any] = {"pid": os.getpid()}
    torch = sys.modules.get("torch")
    if torch is not None:
        info["torch_threads"] = torch.get_num_threads()
        info["torch_interop_threads"] = torch.get_num_interop_threads()
    try:
        from threadpoolctl import threadpool_info  # type: ignore[import-not-found]

        info["threadpools"] = [{k: d.get(k) for k in ("user_api", "internal_api", "version",
                                                      "num_threads")}
                               for d in threadpool_info()]
    except ImportError:
        info["threadpools"] = "threadpoolctl not installed"
    try:
        info["os_threads"] = len(os.listdir(f"/proc/{os.getpid()}/task"))
    except OSError:
        pass
    return info
