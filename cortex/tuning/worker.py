"""Where candidates are measured: a worker process with timeouts, or the tuner's own process.

Pipeline position: between the search (:mod:`cortex.tuning.search`) and the measurer
(:mod:`cortex.tuning.measure`). Both classes here offer the same calls — ``info`` (the default
schedule's :class:`~cortex.tuning.measure.BaselineInfo`), ``program_key``, ``compile``,
``time``, ``drop``, ``close`` — and a ``generation`` that grows whenever the executables compiled so far are lost.

:class:`WorkerMeasurer` (the default) runs a :class:`~cortex.tuning.measure.Measurer` in a
fresh ``python -m cortex.tuning.worker`` process, talking over a socket pair. A compile or a
timing that takes longer than its timeout, or a worker that dies, is killed and replaced
(the new worker compiles the default again), and the candidate is recorded as failed; a
Ctrl-C while the worker is busy replaces it too, so the session can still check and store its
best candidates. The
worker is a plain subprocess, not ``multiprocessing``: it never re-imports the caller's
``__main__``, so a script without an ``if __name__ == "__main__"`` guard can tune. The model
travels by pickle, so its class must be importable; one defined in ``__main__`` (a script, a
notebook) is measured in-process instead (:class:`InProcessMeasurer`, no timeouts), with a
warning. The tuner waits on the socket while the worker measures, so it takes no CPU from it.
"""

from __future__ import annotations

import os
import pickle
import socket
import subprocess
import sys
import traceback
import warnings
from multiprocessing.connection import Connection
from typing import Any, Mapping, Sequence

from cortex.tuning.measure import BaselineInfo, CompileResult, Measurer, TimeResult

#: seconds a new worker may take to import, compile the default schedule and calibrate
START_TIMEOUT = 300.0


class WorkerError(RuntimeError):
    """The worker process could not start or set up (its traceback is in the message)."""


class _Lost(Exception):
    """The worker timed out or died; it has been replaced."""


class InProcessMeasurer:
    """A :class:`Measurer` in this process (timeouts are not enforced)."""

    generation = 0

    def __init__(self, setup: Mapping[str, Any]) -> None:
        self._m = Measurer(**setup)
        self.info: BaselineInfo = self._m.baseline()

    def program_key(self, schedule: Any, timeout: float) -> str | None:
        return self._m.program_key(schedule)

    def compile(self, schedule: Any, timeout: float) -> CompileResult:
        return self._m.compile(schedule)

    def time(self, slots: Sequence[int], rounds: int, cutoff: float, timeout: float) -> dict[int, TimeResult]:
        return self._m.time(slots, rounds, cutoff)

    def drop(self, slots: Sequence[int]) -> None:
        self._m.drop(slots)

    def close(self) -> None:
        self._m.close()


class WorkerMeasurer:
    """A :class:`Measurer` in a worker process, replaced when it overruns a timeout or dies."""

    def __init__(self, setup: Mapping[str, Any]) -> None:
        self._payload = pickle.dumps(dict(setup), protocol=pickle.HIGHEST_PROTOCOL)
        self.generation = 0
        self._proc: subprocess.Popen | None = None
        self._conn: Connection | None = None
        self.info: BaselineInfo = self._start()

    def _start(self) -> BaselineInfo:
        ours, theirs = socket.socketpair()
        env = dict(os.environ)
        # the caller's import path (its script's folder included), so the model's class imports
        env["PYTHONPATH"] = os.pathsep.join([p for p in sys.path if p] + [env.get("PYTHONPATH", "")])
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "cortex.tuning.worker", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL)
        finally:
            theirs.close()
        self._conn = Connection(ours.detach())
        self._conn.send_bytes(self._payload)
        try:
            return self._call(None, START_TIMEOUT)
        except _Lost as e:
            raise WorkerError(f"the tuning worker did not start: {e}") from None

    def _call(self, message: Any, timeout: float) -> Any:
        if self._conn is None:  # lost to a Ctrl-C: start a new worker first
            self.info = self._start()
        assert self._conn is not None and self._proc is not None
        try:
            if message is not None:
                self._conn.send(message)
            if not self._conn.poll(timeout):
                self._kill()
                raise _Lost(f"no answer within {timeout:.0f} s")
            status, value = self._conn.recv()
        except (EOFError, OSError, ConnectionError):
            code = self._kill()
            raise _Lost(f"the worker exited (code {code})") from None
        except KeyboardInterrupt:
            # the worker is still busy with this request: its answer would answer the next one
            self._kill()
            self.generation += 1
            raise
        if status == "error":
            raise WorkerError(value)
        return value

    def _kill(self) -> int | None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            code = self._proc.wait()
            self._proc = None
            return code
        return None

    def _replace(self) -> None:
        self._kill()
        self.generation += 1
        self.info = self._start()

    def program_key(self, schedule: Any, timeout: float) -> str | None:
        try:
            return self._call(("key", schedule), timeout)
        except _Lost:
            self._replace()
            return None

    def compile(self, schedule: Any, timeout: float) -> CompileResult:
        try:
            return self._call(("compile", schedule), timeout)
        except _Lost as e:
            self._replace()
            return CompileResult(None, False, timeout, f"compile or check stopped: {e}")

    def time(self, slots: Sequence[int], rounds: int, cutoff: float, timeout: float) -> dict[int, TimeResult]:
        """The results, or {} when the timing overran ``timeout`` (the slots are then lost)."""
        try:
            return self._call(("time", list(slots), rounds, cutoff), timeout)
        except _Lost:
            self._replace()
            return {}

    def drop(self, slots: Sequence[int]) -> None:
        try:
            self._call(("drop", list(slots)), 60.0)
        except _Lost:
            self._replace()

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._call(("close",), 10.0)
            except (_Lost, WorkerError, KeyboardInterrupt):
                pass
        self._kill()


def open_measurer(setup: Mapping[str, Any], isolate: bool) -> InProcessMeasurer | WorkerMeasurer:
    """A worker process when ``isolate`` and the model can travel by pickle, else in-process."""
    if isolate:
        model = setup["model"]
        why = ""
        if type(model).__module__ == "__main__":
            why = f"its class {type(model).__name__} is defined in __main__"
        else:
            try:
                pickle.dumps(model)
            except Exception as e:  # noqa: BLE001 (any pickling failure means the same)
                why = f"it cannot be pickled ({type(e).__name__}: {e})"
        if not why:
            return WorkerMeasurer(setup)
        warnings.warn(f"measuring in this process, without compile timeouts: the model cannot be "
                      f"sent to a worker process ({why}); define it in an importable module to "
                      f"get them", RuntimeWarning, stacklevel=3)
    return InProcessMeasurer(setup)


def _serve(conn: Connection) -> int:
    try:
        measurer = Measurer(**pickle.loads(conn.recv_bytes()))
        conn.send(("ok", measurer.baseline()))
    except BaseException:  # noqa: BLE001 (reported to the tuner, which raises it)
        conn.send(("error", traceback.format_exc()))
        return 1
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return 0
        op, args = message[0], message[1:]
        try:
            if op == "compile":
                reply: Any = measurer.compile(args[0])
            elif op == "key":
                reply = measurer.program_key(args[0])
            elif op == "time":
                reply = measurer.time(*args)
            elif op == "drop":
                reply = measurer.drop(args[0])
            elif op == "close":
                conn.send(("ok", None))
                return 0
            else:
                raise ValueError(f"unknown request {op!r}")
            conn.send(("ok", reply))
        except Exception:  # noqa: BLE001 (reported to the tuner)
            conn.send(("error", traceback.format_exc()))


def main(argv: Sequence[str]) -> int:
    if len(argv) != 2 or not argv[1].isdigit():
        print("usage: python -m cortex.tuning.worker FD (started by cortex.tune)", file=sys.stderr)
        return 2
    return _serve(Connection(int(argv[1])))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
