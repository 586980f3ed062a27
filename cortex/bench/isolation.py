"""How contenders are kept from disturbing each other: worker processes, stopped while idle.

Pipeline position: outside the compiler pipeline, in ``cortex.bench``. The runner talks to
each contender through a host: :class:`ProcessHost` (a worker process, :mod:`cortex.bench.worker`)
or :class:`LocalHost` (a :class:`~cortex.bench.worker.Worker` in the runner's own process).

Why: a live Cortex executable on a CPU target keeps a team of worker threads that wait for the
next call by spinning, then napping in short sleeps; a peer timed in the same process (or
while that process runs) shares the cores with those wake-ups, and was measured 22-38% slower
for it. Thread pools of the peers (OpenMP, BLAS) idle the same way. So by default
(``stop``) every contender lives in its own process and, while one is timed, every other
worker process is stopped with ``SIGSTOP`` (and confirmed stopped) -- none of their threads
can run -- and continued with ``SIGCONT`` only for its own requests. The JSON's ``fairness``
records the method in force.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import cortex

ISOLATION_METHODS: dict[str, str] = {
    "stop": ("each contender runs in its own worker process; while one is timed every other "
             "worker process is stopped (SIGSTOP, confirmed by waitpid), so no thread of another "
             "contender (an idle Cortex thread team, an OpenMP or BLAS pool) can run"),
    "process": ("each contender runs in its own worker process; the others are idle (blocked "
                "reading their next request) but not stopped: their idle thread pools may "
                "still wake up"),
    "inprocess": ("every contender runs in the runner's own process, as in-process benchmarks "
                  "do: a peer shares the process and the cores with the idle thread teams of "
                  "the Cortex executables built before it (for comparison only)"),
}


def default_isolation() -> str:
    return "stop" if hasattr(signal, "SIGSTOP") and hasattr(os, "WUNTRACED") else "process"


class WorkerError(RuntimeError):
    """A request to a contender failed: the contender raised, timed out or its process died."""


class LocalHost:
    """A contender in this process (``--isolation inprocess``)."""

    def __init__(self, label: str) -> None:
        from cortex.bench.worker import Worker

        self.label = label
        self.pid = os.getpid()
        self.worker = Worker()

    def request(self, op: str, timeout: float, **args: Any) -> Any:  # noqa: ARG002 - no watchdog in-process
        try:
            return getattr(self.worker, op)(**args)
        except Exception as exc:  # noqa: BLE001
            raise WorkerError(f"{type(exc).__name__}: {exc}") from exc

    def close(self) -> None:
        self.worker.drop()


def worker_environment(threads: int) -> dict[str, str]:
    """The workers' environment: this one, ``cortex`` importable from where it was imported
    here, and with ``threads`` > 0 the BLAS/OpenMP pools sized to it unless already set."""
    env = dict(os.environ)
    root = str(Path(cortex.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    if threads > 0:
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env.setdefault(var, str(threads))
    return env


class ProcessHost:
    """A contender in a worker process; with ``stop_idle`` it is stopped between requests."""

    def __init__(self, label: str, *, stop_idle: bool, env: dict[str, str], log_dir: Path) -> None:
        self.label = label
        self.stop_idle = stop_idle
        self.log_path = log_dir / f"{label}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen([sys.executable, "-m", "cortex.bench.worker"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._log, env=env)
        self.pid = self.proc.pid
        self.stopped = False
        self.exit_status: int | None = None

    # ---------------------------------------------------------------- stop / continue
    def pause(self) -> None:
        """Stop the worker (with ``stop_idle``) and wait until it is stopped."""
        if not self.stop_idle or self.stopped or not self.alive():
            return
        os.kill(self.pid, signal.SIGSTOP)
        _, status = os.waitpid(self.pid, os.WUNTRACED)  # returns once it is stopped
        if os.WIFSTOPPED(status):
            self.stopped = True
        else:  # it died instead: keep its exit status (waitpid reaped it)
            self.exit_status = os.waitstatus_to_exitcode(status)

    def resume(self) -> None:
        """Continue a stopped worker."""
        if self.stopped:
            os.kill(self.pid, signal.SIGCONT)
            self.stopped = False

    def alive(self) -> bool:
        return self.exit_status is None and self.proc.poll() is None

    # ---------------------------------------------------------------- requests
    def request(self, op: str, timeout: float, **args: Any) -> Any:
        if not self.alive():
            raise WorkerError(self._death())
        self.resume()
        try:
            assert self.proc.stdin is not None and self.proc.stdout is not None
            pickle.dump({"op": op, **args}, self.proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            self.proc.stdin.flush()
            ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
            if not ready:
                self.kill()
                raise WorkerError(f"{op} took longer than {timeout:.0f} s: the worker was killed")
            reply = pickle.load(self.proc.stdout)
        except (EOFError, OSError, pickle.UnpicklingError) as exc:
            raise WorkerError(self._death(exc)) from exc
        finally:
            self.pause()
        if not reply["ok"]:
            self._log.write(reply.get("traceback", "").encode())
            self._log.flush()
            raise WorkerError(reply["error"])
        return reply["value"]

    def _death(self, exc: BaseException | None = None) -> str:
        code = self.exit_status
        if code is None:
            try:
                code = self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.kill()
                code = self.proc.returncode
        tail = self.log_tail()
        how = f"signal {-code}" if code is not None and code < 0 else f"exit status {code}"
        return (f"the worker process died ({how}"
                + (f", {type(exc).__name__}" if exc else "") + ")"
                + (f"; its last output: {tail}" if tail else ""))

    def log_tail(self, chars: int = 600) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return " ".join(text[-chars:].split())

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.resume()
            self.proc.kill()
            self.proc.wait()

    def close(self) -> None:
        try:
            if self.alive():
                self.resume()
                assert self.proc.stdin is not None
                pickle.dump({"op": "quit"}, self.proc.stdin)
                self.proc.stdin.flush()
                self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired, ValueError):
            pass
        finally:
            self.kill()
            self._log.close()


def make_host(label: str, isolation: str, *, threads: int, log_dir: Path | None = None) -> Any:
    """A host for one contender under ``isolation`` (see :data:`ISOLATION_METHODS`)."""
    if isolation not in ISOLATION_METHODS:
        raise ValueError(f"unknown isolation {isolation!r}; known: {', '.join(ISOLATION_METHODS)}")
    if isolation == "inprocess":
        return LocalHost(label)
    if isolation == "stop" and not hasattr(signal, "SIGSTOP"):
        raise ValueError("isolation 'stop' needs POSIX signals; use --isolation process")
    log_dir = log_dir or Path(tempfile.mkdtemp(prefix="cortex-bench-"))
    return ProcessHost(label, stop_idle=isolation == "stop", env=worker_environment(threads),
                       log_dir=log_dir)
